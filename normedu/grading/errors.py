"""The one exception every check raises.

It lives alone so that every grading module can import it without importing another's
machinery (``compare`` and ``guard`` both raise it, and ``compare`` uses ``guard``).
"""

from __future__ import annotations

__all__ = ["GradingError"]


class GradingError(AssertionError):
    """A failed check; its message tells the student what is likely wrong."""
