"""The travel demo: plan a short trip, with hotels, events and weather looked into side by side."""

from picoflow_demos.travel.flow import Planner, TravelFlow, TravelGoodbye
from picoflow_demos.travel.research import (
    Events,
    EventShortlist,
    Forecast,
    Hotels,
    HotelShortlist,
    Itinerary,
    ItineraryPlan,
    Weather,
)
from picoflow_demos.travel.trip import Trip, TripDetails

__all__ = [
    "EventShortlist",
    "Events",
    "Forecast",
    "HotelShortlist",
    "Hotels",
    "Itinerary",
    "ItineraryPlan",
    "Planner",
    "TravelFlow",
    "TravelGoodbye",
    "Trip",
    "TripDetails",
    "Weather",
]
