"""Runnable example flows: hotel booking, order support and product lookup.

``FLOWS`` is the default set the ``picoflow`` server and CLI register.
"""

from picoflow_demos.hotel import HotelFlow
from picoflow_demos.orders import OrdersFlow
from picoflow_demos.products import ProductFlow

FLOWS = [HotelFlow, OrdersFlow, ProductFlow]

__all__ = ["FLOWS", "HotelFlow", "OrdersFlow", "ProductFlow"]
