"""Runnable example flows: hotel booking, order support, product lookup, trip planning and invoices.

``FLOWS`` is the default set the ``picoflow`` server and CLI register.
"""

from picoflow_demos.hotel import HotelFlow
from picoflow_demos.invoice import InvoiceFlow
from picoflow_demos.orders import OrdersFlow
from picoflow_demos.products import ProductFlow
from picoflow_demos.travel import TravelFlow

FLOWS = [HotelFlow, OrdersFlow, ProductFlow, TravelFlow, InvoiceFlow]

__all__ = ["FLOWS", "HotelFlow", "InvoiceFlow", "OrdersFlow", "ProductFlow", "TravelFlow"]
