"""The orders database: SQLite, every query parameter-bound, every read scoped to one customer.

The model never writes SQL and never names the customer: tools pass typed, validated values to
these functions together with the customer id from the authenticated caller. A refund is one
transaction keyed twice: by the order id (an order is paid back once, whoever approves it again)
and by its reference, the id of the approval that allowed it (one approval writes at most one
refund row, however often the turn carrying it out is retried).
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Literal, get_args

from picoflow_demos._common import today_from

Status = Literal["pending", "shipped", "refunded"]
STATUSES: tuple[Status, ...] = get_args(Status)
RefundStatus = Literal["refunded", "already_refunded", "not_found"]

DB_VARIABLE = "PICOFLOW_ORDERS_DB"
TODAY_VARIABLE = "ORDERS_FLOW_CURRENT_DATE"
DEFAULT_FILE = "picoflow-orders.sqlite3"

_SELECT = "SELECT id, customer_id, status, total_cents, created FROM orders "


def today() -> date:
    """The flow's today: ``ORDERS_FLOW_CURRENT_DATE`` when set, else the real date."""
    return today_from(TODAY_VARIABLE)


@dataclass(frozen=True, slots=True)
class Order:
    id: int
    customer_id: str
    status: Status
    total_cents: int
    created: date


@dataclass(frozen=True, slots=True)
class RefundResult:
    status: RefundStatus
    order: Order | None
    refunded_on: date | None = None


@contextmanager
def connect(path: Path) -> Iterator[sqlite3.Connection]:
    # Autocommit mode: transactions are opened explicitly where they matter (the refund).
    connection = sqlite3.connect(path, timeout=10, isolation_level=None)
    try:
        yield connection
    finally:
        connection.close()


def _order(row: tuple[int, str, str, int, str]) -> Order:
    order_id, customer, status, total, created = row
    if status not in STATUSES:
        raise ValueError(f"order {order_id} has an unknown status")
    return Order(order_id, customer, status, total, date.fromisoformat(created))


class OrdersDatabase:
    """Reads and refunds, always for one customer. Each call opens its own short connection."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def search(
        self, customer_id: str, since: date, until: date | None, status: Status | None, limit: int
    ) -> tuple[list[Order], bool]:
        """Orders created from ``since`` to ``until`` (inclusive), newest first, and whether more exist."""
        query = _SELECT + "WHERE customer_id = ? AND created >= ?"
        params: list[object] = [customer_id, since.isoformat()]
        if until is not None:
            query += " AND created <= ?"
            params.append(until.isoformat())
        if status is not None:
            query += " AND status = ?"
            params.append(status)
        query += " ORDER BY created DESC, id DESC LIMIT ?"
        params.append(limit + 1)
        with connect(self.path) as connection:
            rows = connection.execute(query, params).fetchall()
        return [_order(row) for row in rows[:limit]], len(rows) > limit

    def get(self, customer_id: str, order_id: int) -> Order | None:
        """The order, or None when it does not exist *or* belongs to someone else (indistinguishable)."""
        with connect(self.path) as connection:
            row = connection.execute(
                _SELECT + "WHERE id = ? AND customer_id = ?",
                (order_id, customer_id),
            ).fetchone()
        return _order(row) if row else None

    def refund(self, customer_id: str, order_id: int, *, reference: str) -> RefundResult:
        """Refund the order in full, once: the refunds table's keys on the order id and on the
        ``reference`` (an approval's id) make it idempotent."""
        with connect(self.path) as connection:
            # IMMEDIATE takes the write lock up front, so two concurrent refunds serialise here.
            connection.execute("BEGIN IMMEDIATE")
            try:
                row = connection.execute(
                    _SELECT + "WHERE id = ? AND customer_id = ?",
                    (order_id, customer_id),
                ).fetchone()
                if row is None:
                    connection.execute("ROLLBACK")
                    return RefundResult("not_found", None)
                order = _order(row)
                refunded_on = today()
                inserted = connection.execute(
                    "INSERT OR IGNORE INTO refunds (order_id, amount_cents, refunded_on, reference) "
                    "VALUES (?, ?, ?, ?)",
                    (order_id, order.total_cents, refunded_on.isoformat(), reference),
                ).rowcount
                if not inserted:  # this order, or this reference, was refunded already
                    earlier = connection.execute(
                        "SELECT refunded_on FROM refunds WHERE order_id = ? OR reference = ?",
                        (order_id, reference),
                    ).fetchone()
                    connection.execute("ROLLBACK")
                    return RefundResult("already_refunded", order, date.fromisoformat(earlier[0]))
                connection.execute("UPDATE orders SET status = 'refunded' WHERE id = ?", (order_id,))
                connection.execute("COMMIT")
            except BaseException:
                if connection.in_transaction:
                    connection.execute("ROLLBACK")
                raise
        refunded = Order(order.id, customer_id, "refunded", order.total_cents, order.created)
        return RefundResult("refunded", refunded, refunded_on)

    def refund_count(self, order_id: int) -> int:
        with connect(self.path) as connection:
            row = connection.execute(
                "SELECT COUNT(*) FROM refunds WHERE order_id = ?", (order_id,)
            ).fetchone()
        return int(row[0])

    def refund_references(self) -> dict[int, str]:
        """Every refunded order's reference (the seeded ones read ``seed-<order>``)."""
        with connect(self.path) as connection:
            rows = connection.execute("SELECT order_id, reference FROM refunds ORDER BY order_id").fetchall()
        return {int(order_id): str(reference) for order_id, reference in rows}


def default_database() -> OrdersDatabase:
    """The database at ``$PICOFLOW_ORDERS_DB`` (default ``./picoflow-orders.sqlite3``).

    The file is created and seeded with the demo orders on first use. Nothing is cached: an
    ``OrdersDatabase`` is only its path (each call opens its own connection), so a changed
    variable is seen at once.
    """
    path = Path(os.environ.get(DB_VARIABLE, "").strip() or DEFAULT_FILE).resolve()
    if not path.exists():
        _create_once(path)
    return OrdersDatabase(path)


def _create_once(path: Path) -> None:
    # Two processes may start on a fresh machine at once; only one may seed the file.
    from picoflow_demos.orders.seed import create_database

    staging = path.with_name(f".{path.name}.{os.getpid()}.{time.monotonic_ns()}")
    create_database(staging)
    try:
        os.link(staging, path)  # atomic, and fails instead of replacing a file another process made
    except FileExistsError:
        pass
    finally:
        staging.unlink(missing_ok=True)
