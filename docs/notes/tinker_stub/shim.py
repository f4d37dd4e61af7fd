# Import shim: lets the unpacked wheel import without installing zstandard/orjson/pyqwest.
import sys, types as _t, json
sys.path.insert(0, "/tmp/tinker-src")
sys.modules["torch"] = None
sys.modules["transformers"] = None
o = _t.ModuleType("orjson"); o.loads = json.loads; o.dumps = lambda x: json.dumps(x).encode(); sys.modules["orjson"] = o
for name in ["zstandard", "pyqwest", "pyqwest.httpx", "h2"]:
    sys.modules[name] = _t.ModuleType(name)
