"""A stale or broken file in a plugin folder does not stop `import nabla`:
it is skipped with one warning naming it and why, and the rest loads."""
import os
import subprocess
import sys


def test_import_skips_a_broken_plugin_on_the_path(tmp_path):
    broken = tmp_path / "libstale.so"
    broken.write_text("not a shared library\n")
    env = dict(os.environ, NABLA_PLUGIN_PATH=str(tmp_path))
    r = subprocess.run([sys.executable, "-c", "import nabla; print(any(op['type'] == 'mul' for op in nabla.ops_list()))"],
                       env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "True", r.stdout
    warnings = [line for line in r.stderr.splitlines() if line]
    assert len(warnings) == 1, r.stderr
    assert "nabla: warning: skipped cannot load plugin" in warnings[0], warnings[0]
    assert str(broken) in warnings[0] and "not a nabla plugin" in warnings[0], warnings[0]
