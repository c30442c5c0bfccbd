"""The seed's resume.py: continue (or return) a run, knowing only its id.

python resume.py cabc9046ac5040298aa362c0d6d2c5c5
"""

import sys

from agent import agent

if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python resume.py RUN_ID")
    result = agent.resume(sys.argv[1])
    print("status:", result.status)
    print("final_output:", result.final_output)
