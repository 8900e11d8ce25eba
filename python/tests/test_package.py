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


def test_pip_installs_the_package(tmp_path):
    """`pip install ./python` (here offline, into a folder) gives an importable package with the
    env worker's command."""
    import os
    import shutil
    import pytest
    if subprocess.run([sys.executable, "-m", "pip", "--version"], capture_output=True).returncode:
        pytest.skip("no pip for %s" % sys.executable)
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    src = tmp_path / "src"
    shutil.copytree(os.path.join(here, "selroll"), src / "selroll",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(os.path.join(here, "pyproject.toml"), src)
    target = tmp_path / "site"
    p = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-build-isolation",
                        "--no-deps", "--no-index", "--target", str(target), str(src)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    out = subprocess.run([sys.executable, "-m", "selroll.env_worker", "--help"], capture_output=True,
                         text=True, env={"PYTHONPATH": str(target)}, cwd=str(tmp_path), timeout=30)
    assert out.returncode == 0 and "MODULE:CLASS" in out.stdout, out.stderr
    assert os.path.exists(target / "selroll" / "trainer.py")
    assert os.access(target / "bin" / "selroll-env-worker", os.X_OK)


def test_the_modules_need_no_numpy_or_torch():
    import os
    code = ("import sys, selroll, selroll.env_worker, selroll.trainer, selroll.registry; "
            "selroll.EnvWorker, selroll.Trainer, selroll.to_tensors; "
            "assert 'torch' not in sys.modules and 'numpy' not in sys.modules, 'numpy or torch'")
    subprocess.run([sys.executable, "-c", code], check=True,
                   env={"PYTHONPATH": os.path.join(os.path.dirname(__file__), "..")})
