"""The numbers the language fixes where a spec says nothing.

The decision function applies them; the static budget bound (``bound``)
reasons with them. Both read them here, so the language never reaches into
the interpreter for a default.
"""

from __future__ import annotations

__all__ = ["DEFAULT_STEP_BUDGET", "DEFAULT_UNKNOWN_REISSUES", "SCHEDULED_ATTEMPTS"]

DEFAULT_STEP_BUDGET = 1000
"""The run's ``steps`` limit when its budget names none."""

DEFAULT_UNKNOWN_REISSUES = 3
"""Issues of a readonly/idempotent call after unknown outcomes, without a retry policy."""

SCHEDULED_ATTEMPTS = 3
"""Issues of a readonly/idempotent scheduled call whose outcome stays unknown."""
