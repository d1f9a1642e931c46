"""Fixtures the server tests share: ``fresh_ledger`` (an empty refund ledger around a test), for the
approval tests over HTTP and in the chat page, which ask for it by name."""

from __future__ import annotations

from .approvals_support import fresh_ledger

__all__ = ["fresh_ledger"]
