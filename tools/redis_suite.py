"""`import redis_suite` for the client-suite tools: loads tools/redis-suite.py (whose name, the
one the docs give, is no module name) as the module `redis_suite`, once."""

import importlib.util
import os
import sys

_spec = importlib.util.spec_from_file_location(
    "redis_suite", os.path.join(os.path.dirname(os.path.abspath(__file__)), "redis-suite.py"))
_module = importlib.util.module_from_spec(_spec)
sys.modules[__name__] = _module
_spec.loader.exec_module(_module)
