"""What the access log names for a request: its route template, never the path or the query string.

The access log (:mod:`app.serving.access_log`) and the request metrics name a request by
:func:`route_template`: the template of the route that answered (``/v1/keys/{name}/encrypt``), or
``unmatched``, so no token sent as ``?token=``, IV or key name reaches a log line or a label.
"""

from __future__ import annotations

import re
import weakref
from typing import Any

from starlette.types import Scope

#: What a request no route matches (a 404, or one refused before routing on an unknown path) is logged as.
UNMATCHED = "unmatched"
_PARAMETER = re.compile(r"\{[^}/]+\}")
#: Per app: (pattern, template) for each path of its OpenAPI document, literal paths first.
_TEMPLATES: weakref.WeakKeyDictionary[Any, list[tuple[re.Pattern[str], str]]] = weakref.WeakKeyDictionary()


def route_template(scope: Scope) -> str:
    """The path template of the route that took ``scope`` (set by the router or the hot path); for a request
    answered before routing (a 401 or 413 of the body-limit middleware...), the template of the documented
    path it matches; else :data:`UNMATCHED`. Never the raw path, never the query string."""
    path = getattr(scope.get("route"), "path", None)
    if isinstance(path, str):
        return path
    app = scope.get("app")
    if app is None:
        return UNMATCHED
    templates = _TEMPLATES.get(app)
    if templates is None:
        templates = _TEMPLATES[app] = _documented_templates(app)
    raw = scope.get("path", "")
    return next((template for pattern, template in templates if pattern.fullmatch(raw)), UNMATCHED)


def _documented_templates(app: Any) -> list[tuple[re.Pattern[str], str]]:
    """The paths of ``app``'s OpenAPI document as patterns (a parameter matches one path segment)."""
    paths = app.openapi().get("paths", {})
    compiled = []
    for template in sorted(paths, key=lambda t: (len(_PARAMETER.findall(t)), t)):
        pieces = _PARAMETER.split(template)
        compiled.append((re.compile("[^/]+".join(re.escape(piece) for piece in pieces)), template))
    return compiled
