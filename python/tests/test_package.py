"""The package imports with only the standard library loaded and states its versions."""
import subprocess
import sys


def test_import_needs_no_numpy_or_torch():
    code = ("import sys, selroll; "
            "assert 'torch' not in sys.modules and 'numpy' not in sys.modules; "
            "print(selroll.__version__, selroll.PROTOCOL_VERSION)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env={"PYTHONPATH": __import__("os").path.join(
                             __import__("os").path.dirname(__file__), "..")})
    ver, proto = out.stdout.split()
    assert ver.count(".") == 2
    assert int(proto) >= 1
