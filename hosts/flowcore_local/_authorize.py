"""The local host's authorization hook: ``LocalHost(authorize=fn)``.

The hook is host-neutral (the Temporal host's workers take the same one): its
types and the refusal it makes are ``flowcore_handlers``' (``_authorize``),
named here too.
"""

from __future__ import annotations

from flowcore_handlers import Authorize, Unauthorized, refusal, refused_event

__all__ = ["Authorize", "Unauthorized", "refusal", "refused_event"]
