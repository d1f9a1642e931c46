"""The order-support demo: search orders in SQLite, refund with the customer's confirmation."""

from picoflow_demos.orders.database import OrdersDatabase, default_database
from picoflow_demos.orders.flow import ApproveRefund, OrdersFlow, OrdersGoodbye, Support
from picoflow_demos.orders.seed import create_database

__all__ = [
    "ApproveRefund",
    "OrdersDatabase",
    "OrdersFlow",
    "OrdersGoodbye",
    "Support",
    "create_database",
    "default_database",
]
