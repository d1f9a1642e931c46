"""The order-support demo: search orders in SQLite, refund what a person approves."""

from picoflow_demos.orders.database import OrdersDatabase, default_database
from picoflow_demos.orders.flow import OrdersFlow, OrdersGoodbye, Refund, Support
from picoflow_demos.orders.seed import create_database

__all__ = [
    "OrdersDatabase",
    "OrdersFlow",
    "OrdersGoodbye",
    "Refund",
    "Support",
    "create_database",
    "default_database",
]
