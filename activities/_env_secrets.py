"""The credentials an environment variable holds, by its name and inside its value.

A variable named as a credential (`GITHUB_TOKEN`, `DB_PASSWORD`, `API_KEY_2`), and
those inside a value of any name: a URL's userinfo and credential query values, a
connection string's or a command line's credential settings, a PEM private key's
lines, a JSON document's credential fields. `_redact` remembers them, so a tool
returning one, or an error quoting it, shows `***`. Plain words and paths are not
credentials here (`env_secret`): masking them garbled ordinary text.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from urllib.parse import unquote, unquote_plus, urlsplit

from agentor_temporal.workflows.redaction import (
    MIN_SECRET_CHARS,
    credential_name,
    header_secrets,
    looks_like_key,
    query_credential,
)
from agentor_temporal.workflows.userinfo import raw_passwords

#: Environment variable names whose values are credentials: the last word of the name
#: says so (`GITHUB_TOKEN`, `ANTHROPIC_API_KEY`, `DB_PASSWORD`, `AWS_SECRET_ACCESS_KEY`,
#: `AGENTOR_ENCRYPTION_KEYS`).
#: Not a word inside the name (`SSH_AUTH_SOCK`, `PASSWORD_STORE_DIR` are paths). The
#: last word may be glued to the one before when it cannot end another word
#: (`SYSTEM_ACCESSTOKEN`, `NGROK_AUTHTOKEN`, `MINIO_SECRETKEY`; not `HOTKEY`, `BYPASS`);
#: a personal access token (`AZURE_DEVOPS_EXT_PAT`), an auth or authorization value
#: (`NPM_CONFIG__AUTH`, `TEMPORAL_GRPC_META_AUTHORIZATION`) and a cookie are too. The
#: word may be plural (`CLIENT_SECRETS`; `API_TOKENS`, not `MAX_TOKENS`) and followed by
#: a rotation's or a list's suffix (`API_KEY_2`, `JWT_SECRET_OLD`, `STRIPE_SECRET_KEY_V2`,
#: Rails' `SECRET_KEY_BASE`); Terraform's `TF_TOKEN_<host>` is one whatever its host.
#: A password's short names (MySQL's `MYSQL_PWD`, `LDAP_BIND_PW`, sshpass's `SSHPASS`), a
#: JWT (GitLab's `CI_JOB_JWT_V2`) and a key glued to the word that says whose (Gradle's
#: `ORG_GRADLE_PROJECT_signingKey`, `MASTERKEY`) are too: each such variable's value was
#: recorded as it was wherever a tool returned it.
_ENV_CREDENTIAL = re.compile(
    r"(?:(?:(?:^|_)(?:KEYS?|APIKEY|PASS|CREDENTIALS?|PAT|AUTH|AUTHORIZATION|COOKIE"
    r"|SSHPASS|JWTS?)"
    r"|_(?:PWD|PW)"
    r"|(?:TOKEN|SECRETS?|PASSWORDS?|PASSWD|PASSPHRASE"
    r"|(?:API|ACCESS|ACCOUNT|SECRET|PRIVATE|SIGNING|SHARED|CLIENT|SESSION|SECURITY|MASTER"
    r"|BEARER)KEYS?)"
    r"|(?:^|_)(?:API|ACCESS|AUTH|BEARER|BOT|CLIENT|SERVICE)_?TOKENS)"
    r"(?:_(?:\d+|V\d+|OLD|NEW|PREV|PREVIOUS|NEXT|BACKUP|PRIMARY|SECONDARY|CURRENT"
    r"|FALLBACK|ROTATED|BASE))?$)"
    r"|^TF_TOKEN_",
    re.I,
)


#: The keys this process uses itself: masked whatever they look like.
_OWN_KEYS = frozenset({"OPENAI_API_KEY", "TEMPORAL_API_KEY"})


def env_credential(name: str) -> bool:
    """Whether an environment variable named `name` holds a credential (`_ENV_CREDENTIAL`)."""
    return bool(_ENV_CREDENTIAL.search(name))


def env_secret(value: str) -> bool:
    """Whether a credential variable's value is masked wherever it shows.

    Not a path to one (`GOOGLE_APPLICATION_CREDENTIALS=/etc/gcp.json`), and not
    a short plain word (`DB_PASSWORD=postgres`, `changeme`): masked in every
    tool result and model answer, those garbled ordinary text ("connected to
    ***") and hid nothing anyone could not guess.
    """
    value = value.strip()
    if len(value) < MIN_SECRET_CHARS or value[0] in "/~.":
        return False
    return not (len(value) < 16 and value.isalpha())


#: A URL inside an environment variable's value (`DATABASE_URL`, a list of broker URLs).
_ENV_URL = re.compile(r"\b[A-Za-z][A-Za-z0-9+.\-]*://[^\s,;'\"<>`]+")


#: A `Name=value` setting inside a connection string (`AccountKey=...;`, ADO.NET's
#: `Password=...;`, libpq's `password=... host=...`), a command line's option
#: (`JAVA_TOOL_OPTIONS=-Dspring.datasource.password=...`, `--db-password=...`), an
#: `.npmrc` line (`//registry.npmjs.org/:_authToken=...`) or a YAML one (`password: ...`);
#: its value quoted (`Password="a;b"`, `password='a b'`) or not, a `=` in it only as
#: base64 padding.
_ENV_SETTING = re.compile(
    r"""(?:^|[;&\s:/\-])([A-Za-z_][A-Za-z0-9_.\-]*)\s*(?:=|:(?=[ \t]))[ \t]*"""
    r"""(?:"([^"\n]*)"|'([^'\n]*)'|((?:(?:[Bb]earer|BEARER|[Bb]asic|BASIC)[ \t]+)?"""
    r"""[^;&\s,='"]+=*))"""
)


#: A `.netrc` document (a CI's netrc kept in a variable): its tokens are apart by spaces and
#: line breaks, no `=` or `:`, and it begins (past comments) with a `machine` or a `default`
#: entry; a text that only mentions a machine is none.
_NETRC = re.compile(
    r"\s*(?:#[^\n]*\n\s*)*(?:machine\s+\S+|default)\s+(?:login|password|account|macdef)\s"
)
#: A `.netrc` entry's `password` (or `account`: a second secret some hosts ask) value.
_NETRC_SECRET = re.compile(r"(?:^|\s)(?:password|account)\s+(\S+)")


#: A PEM private key (`TEMPORAL_TLS_CLIENT_KEY_DATA`), its lines apart or joined by `\\n`, or
#: an OpenPGP one as `gpg --armor --export-secret-keys` writes it (Gradle's in-memory
#: signing key, `ORG_GRADLE_PROJECT_signingKey`).
_PEM_KEY = re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY(?: BLOCK)?-----(.*?)-----END", re.S)
#: A line break inside a PEM or PGP body, as written or JSON-escaped.
_PEM_BREAK = re.compile(r"\r?\n|\\r\\n|\\n")
#: Shortest line of a PEM body masked (a short last line could be any text).
_PEM_LINE = 16


def env_value_secrets(value: str) -> list[str]:
    """The credentials inside an environment variable's value, whatever its name: its URLs'
    (`env_url_secrets`), a connection string's settings whose names say credential
    (`AZURE_STORAGE_CONNECTION_STRING=...;AccountKey=<key>;...`, `Password=`, `Pwd=`,
    `SharedAccessKey=`, `sig=`; by the name's last word, `credential_name`: not
    `credential.helper=manager-core`), unless a plain word or a path (`env_secret`), each
    line of a PEM private key (`TEMPORAL_TLS_CLIENT_KEY_DATA`), a JSON document's
    credential fields (`json_secrets`), and a `.netrc`'s `password` and `account` values."""
    found = env_url_secrets(value)
    for body in _PEM_KEY.findall(value):
        for line in _PEM_BREAK.split(body):
            # an armor header (`Comment: https://gnupg.org`, `Proc-Type: 4,ENCRYPTED`) is no key
            if ": " not in line:
                found += [part for part in line.split() if len(part) >= _PEM_LINE]
    for name, *items in _ENV_SETTING.findall(_ENV_URL.sub(" ", value)):
        item = "".join(items)  # the one that matched: double-quoted, single-quoted or bare
        if credential_name(name) and env_secret(item):
            found.append(item)
            # as an HTTP header's (OTEL_EXPORTER_OTLP_HEADERS' `authorization=Bearer%20<token>`):
            # percent-decoded, the token after its scheme, a Basic one's user:password
            found += [s for s in header_secrets(name, unquote(item)) if env_secret(s)]
            # a base64 `user:password`, as a JSON document's `auth` is read: an `.npmrc`'s
            # `_auth=` (npm's basic login)
            found += _basic_pair(item)
    if value.lstrip().startswith(("{", "[")):
        found += json_secrets(value)
    if _NETRC.match(value):
        found += [item for item in _NETRC_SECRET.findall(value) if env_secret(item)]
    return list(dict.fromkeys(found))


#: How deep `json_secrets` walks a document (a credentials file nests two or three levels).
_JSON_DEPTH = 16


def json_secrets(text: str) -> list[str]:
    """The credentials a JSON document holds (a variable of any name): the text values of
    fields whose names say credential (`credential_name`), at any depth, unless plain words
    or paths (`env_secret`); with the `user:password` and the password a base64 `auth`
    carries, and the secrets of every other text value (`env_value_secrets`: a connection
    string, a URL, a PEM key).

    GitLab's `DOCKER_AUTH_CONFIG` (`{"auths": {host: {"auth": base64}}}`), a service
    account's JSON (`GOOGLE_CREDENTIALS`: `private_key`), AWS's (`SecretAccessKey`,
    `SessionToken`), Azure's (`clientSecret`): a tool reading one and returning the field
    recorded it as it was, since only the whole variable's text was known.
    """
    try:
        document = json.loads(text)
    except ValueError:
        return []
    found: list[str] = []

    def walk(node: object, name: str, depth: int) -> None:
        if depth > _JSON_DEPTH:
            return
        if isinstance(node, dict):
            for key, item in node.items():
                walk(item, str(key), depth + 1)
        elif isinstance(node, list):
            for item in node:
                walk(item, name, depth + 1)
        elif isinstance(node, str):
            if credential_name(name) and env_secret(node):
                found.append(node)
                found.extend(_basic_pair(node))
            if "=" in node or "://" in node or "PRIVATE KEY" in node:
                found.extend(env_value_secrets(node))

    walk(document, "", 0)
    return found


def _basic_pair(value: str) -> list[str]:
    """The `user:password` and the password a base64 `auth` value encodes (Docker's)."""
    try:
        pair = base64.b64decode(value, validate=True).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return []
    user, colon, password = pair.partition(":")
    if not colon or not pair.isprintable():
        return []
    return [s for s in (pair, password) if env_secret(s)]


def env_url_secrets(value: str) -> list[str]:
    """The credentials the URLs in an environment variable's value carry, whatever its name.

    `DATABASE_URL=postgresql://app:<password>@db/prod`, `HTTPS_PROXY=http://u:<password>@proxy`,
    `CELERY_BROKER_URL`, a webhook's key in its path, `?api-key=` in its query: the
    password (unless a plain word, as `env_secret`), a username shaped like a token or a
    long one alone (`https://<token>@github.com/...`; not `app` or `postgres`), credential
    query values and path segments shaped like a key. A tool reading its connection
    string and returning it recorded the password as it was: only error text masked a
    URL's userinfo by its shape.
    """
    # a password holding `#`, `?`, `/`, a bracket, `;` or `,` as written (SQLAlchemy takes it
    # so): `urlsplit` ends the authority before its `@`, or `_ENV_URL` the URL
    found: list[str] = raw_passwords(value)
    for url in _ENV_URL.findall(value):
        try:
            parts = urlsplit(url)
            password, username = parts.password, parts.username
        except ValueError:
            continue
        if password:
            found += [password, unquote(password)]
        # a token given as the username alone (`https://<token>@github.com/...`)
        long_alone = not password and len(username or "") >= 20
        if username and (looks_like_key(unquote(username)) or long_alone):
            found += [username, unquote(username)]
        # the fragment's too: an OAuth redirect's `#access_token=...`
        for pair in [*parts.query.split("&"), *parts.fragment.split("&")]:
            name, equals, item = pair.partition("=")
            if equals and query_credential(unquote_plus(name), unquote_plus(item)):
                found += [item, unquote_plus(item)]
        found += [seg for seg in parts.path.split("/") if looks_like_key(unquote(seg))]
    return [s for s in dict.fromkeys(found) if env_secret(s)]


def env_variable_secrets(name: str, value: str) -> list[str]:
    """The credentials an environment variable holds.

    Its whole value when it is one of the process's own keys or its name says credential
    (`env_credential`), and then each entry of a list (`API_TOKENS=<a>,<b>`,
    `AGENTOR_ENCRYPTION_KEYS`' `id:key` entries) too; and those inside a value of any name
    (`env_value_secrets`: a URL's, a connection string's, a JSON document's).
    """
    found: list[str] = []
    if name in _OWN_KEYS or (env_credential(name) and env_secret(value)):
        found.append(value)
        for entry in re.split(r"[,;\n]", value):
            for part in (entry.strip(), entry.partition(":")[2].strip()):
                if part != value and env_secret(part):
                    found.append(part)
    if (
        "=" in value
        or ": " in value  # a YAML document's `password: ...`
        or "://" in value  # DATABASE_URL's password
        or "PRIVATE KEY" in value
        or value.lstrip().startswith(("{", "["))  # DOCKER_AUTH_CONFIG, a service account
        or _NETRC.match(value)  # a `.netrc`'s `password ...`
    ):
        found += env_value_secrets(value)
    return list(dict.fromkeys(found))
