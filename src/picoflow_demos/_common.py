"""Small helpers the example flows share: a reproducible "today" and US money."""

from __future__ import annotations

import os
from datetime import date
from decimal import ROUND_HALF_UP, Decimal

CENT = Decimal("0.01")


def today_from(variable: str) -> date:
    """Today's date, or the ISO date in environment ``variable`` when set (for reproducible runs)."""
    value = os.environ.get(variable, "").strip()
    if not value:
        return date.today()
    try:
        return date.fromisoformat(value)
    except ValueError:
        raise ValueError(f"{variable} must be an ISO date such as 2027-07-15") from None


def cents(value: Decimal) -> Decimal:
    """``value`` rounded to cents, half up (the way a price list is rounded, not banker's rounding)."""
    return value.quantize(CENT, rounding=ROUND_HALF_UP)


def usd(value: Decimal | int | float) -> str:
    """US currency: ``$1,234.56``."""
    amount = cents(Decimal(str(value)))
    sign = "-" if amount < 0 else ""
    return f"{sign}${abs(amount):,.2f}"


def usd_cents(total_cents: int) -> str:
    """US currency from an integer number of cents."""
    return usd(Decimal(total_cents) / 100)
