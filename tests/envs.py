"""A throwaway virtual environment for the tests that install the course's wheel (the
students' wheel, Gradescope's setup.sh)."""

import subprocess
import sysconfig
import venv
from pathlib import Path


def fresh_env(where: Path) -> Path:
    """A virtual environment that sees the project environment's packages (a plain path
    entry: its .pth files, the checkout's editable normedu among them, are not run) but not
    normedu: the zip's wheel must provide it."""
    venv.EnvBuilder(system_site_packages=True, with_pip=False).create(where)
    python = where / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    (Path(site) / "project-env.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return python
