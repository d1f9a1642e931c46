"""The hotel demo: find, compare and book a hotel in the Portland, Oregon area."""

from picoflow_demos.hotel.criteria import Criteria
from picoflow_demos.hotel.flow import Booking, Compare, Explore, Goodbye, GuestRequest, HotelFlow, Present
from picoflow_demos.hotel.pricing import HotelQuote, cheapest_first, quote_hotels

__all__ = [
    "Booking",
    "Compare",
    "Criteria",
    "Explore",
    "Goodbye",
    "GuestRequest",
    "HotelFlow",
    "HotelQuote",
    "Present",
    "cheapest_first",
    "quote_hotels",
]
