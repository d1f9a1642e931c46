"""Create the demo orders database.

    python -m picoflow_demos.orders.seed PATH [--as-of YYYY-MM-DD]

The orders are dated relative to ``--as-of`` (default: today, or ``ORDERS_FLOW_CURRENT_DATE``),
so "what was refunded since the first of last month" has answers whenever the demo is run.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from datetime import date, timedelta
from pathlib import Path

from picoflow_demos.orders.database import Status, connect, today

SCHEMA = """
CREATE TABLE IF NOT EXISTS orders (
    id INTEGER PRIMARY KEY,
    customer_id TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('pending', 'shipped', 'refunded')),
    total_cents INTEGER NOT NULL CHECK (total_cents >= 0),
    created TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS orders_by_customer ON orders (customer_id, created);
CREATE TABLE IF NOT EXISTS refunds (
    order_id INTEGER PRIMARY KEY REFERENCES orders (id),
    amount_cents INTEGER NOT NULL,
    refunded_on TEXT NOT NULL,
    -- What paid the refund back: the approval's id, so one approval can never write two refunds.
    reference TEXT NOT NULL UNIQUE
);
"""

# (customer, status, total in cents, days before "as of"). C-1001 is the customer of the tests;
# "local" is the principal `picoflow chat` and the open-mode server use, so the demo has orders out
# of the box; the others exist so that scoping every query by customer has something to hide.
SEED: tuple[tuple[str, Status, int, int], ...] = (
    ("C-1001", "shipped", 4_250, 70),
    ("C-1001", "refunded", 12_999, 61),
    ("C-1001", "refunded", 5_420, 48),
    ("C-1001", "shipped", 8_900, 40),
    ("C-1001", "refunded", 2_375, 31),
    ("C-1001", "shipped", 15_600, 12),
    ("C-1001", "pending", 3_110, 2),
    ("C-1002", "refunded", 99_900, 45),
    ("C-1002", "shipped", 24_000, 33),
    ("C-1002", "refunded", 1_250, 20),
    ("C-1002", "pending", 7_700, 5),
    ("C-1003", "shipped", 18_450, 90),
    ("C-1003", "refunded", 6_600, 38),
    ("C-1003", "pending", 11_000, 1),
    ("local", "shipped", 6_499, 55),
    ("local", "refunded", 18_000, 35),
    ("local", "shipped", 2_999, 9),
    ("local", "pending", 12_450, 1),
)
FIRST_ORDER_ID = 40001


def create_database(path: str | Path, *, as_of: date | None = None) -> Path:
    """Create the orders database at ``path`` with the demo orders, dated relative to ``as_of``.

    Refuses a file that already holds orders, so a real database is never overwritten.
    """
    target = Path(path)
    day = as_of or today()
    target.parent.mkdir(parents=True, exist_ok=True)
    with connect(target) as connection:
        connection.executescript(SCHEMA)
        if connection.execute("SELECT 1 FROM orders LIMIT 1").fetchone():
            raise FileExistsError(f"{target} already holds orders")
        connection.execute("BEGIN")
        for offset, (customer, status, total, days_ago) in enumerate(SEED):
            order_id = FIRST_ORDER_ID + offset
            created = day - timedelta(days=days_ago)
            connection.execute(
                "INSERT INTO orders (id, customer_id, status, total_cents, created) VALUES (?, ?, ?, ?, ?)",
                (order_id, customer, status, total, created.isoformat()),
            )
            if status == "refunded":
                connection.execute(
                    "INSERT INTO refunds (order_id, amount_cents, refunded_on, reference) "
                    "VALUES (?, ?, ?, ?)",
                    (order_id, total, (created + timedelta(days=3)).isoformat(), f"seed-{order_id}"),
                )
        connection.execute("COMMIT")
    return target


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m picoflow_demos.orders.seed", description=__doc__)
    parser.add_argument("path", type=Path, help="SQLite file to create")
    parser.add_argument("--as-of", type=date.fromisoformat, default=None, help="date the orders lead up to")
    args = parser.parse_args(argv)
    try:
        created = create_database(args.path, as_of=args.as_of)
    except FileExistsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    customers = sorted({customer for customer, *_ in SEED})
    print(f"created {created}: {len(SEED)} orders of customers {', '.join(customers)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
