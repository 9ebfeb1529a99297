"""Claim checks, one module per chapter (see :mod:`normedu.ledger`).

Every module in this folder is imported here so that its ``@claims_for`` functions register;
adding a chapter's checks means adding a module, nothing else.
"""

import importlib
import pkgutil

for _mod in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_mod.name}")
