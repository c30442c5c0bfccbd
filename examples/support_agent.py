"""The support agent of `order_workflow.py`: looks an order up, decides on a refund.

Kept apart from the workflow module: a workflow module is imported again in
the workflow sandbox, so it should hold workflow code only.
`agentor-temporal resume RUN_ID --agent examples.support_agent:agent` works on
its runs like on any other.
"""

import json

from agentor_temporal import Agentor, FileStore, function_tool

ORDERS = {
    "A-1001": {"item": "ceramic teapot", "amount": 42.0, "delivery": "arrived broken"},
    "A-1002": {"item": "wool scarf", "amount": 25.0, "delivery": "delivered, worn twice"},
}


@function_tool
def lookup_order(order_id: str) -> str:
    """Look up an order: what was bought, its price, and how the delivery went.

    Args:
        order_id: The order's id, like A-1001.
    """
    order = ORDERS.get(order_id)
    return json.dumps(order) if order else f"No order {order_id}."


agent = Agentor(
    name="Support Agent",
    model="gpt-4o-mini",
    instructions=(
        "You decide refund requests. Look the order up first. Refund an item that "
        "arrived damaged or never arrived; otherwise do not. Answer with REFUND or "
        "NO REFUND on the first line, then one sentence saying why."
    ),
    tools=[lookup_order],
    store=FileStore("runs"),
)
