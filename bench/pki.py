"""A throwaway certificate authority for mutual TLS (``DISTRIB_TLS_*``), made
with the ``openssl`` command: for the TLS rows of ``bench/transport.py`` and
for ``tests/test_tls.py``. Nothing here is for production use (keys are
unencrypted, certificates last two days).

    make_pki(directory)  ->  {"DISTRIB_TLS_CERT": ..., "DISTRIB_TLS_KEY": ..., "DISTRIB_TLS_CA": ...}
"""
from __future__ import annotations

import os
import shutil
import subprocess

__all__ = ["have_openssl", "make_pki"]


def have_openssl() -> bool:
    return shutil.which("openssl") is not None


def _run(*args: str, cwd: str) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=30)


def make_pki(directory: str | os.PathLike) -> dict[str, str]:
    """A CA and one certificate signed by it, in the new folder ``directory``:
    the three DISTRIB_TLS_* values (every task of a cluster may share them)."""
    directory = os.fspath(directory)
    os.mkdir(directory)
    name = os.path.basename(directory.rstrip("/"))
    _run("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", "ca.key", cwd=directory)
    _run("req", "-x509", "-new", "-key", "ca.key", "-subj", f"/CN=ca-{name}", "-days", "2",
         "-out", "ca.pem", cwd=directory)
    _run("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", "node.key", cwd=directory)
    _run("req", "-new", "-key", "node.key", "-subj", "/CN=node", "-out", "node.csr", cwd=directory)
    with open(os.path.join(directory, "ext.cnf"), "w") as f:
        f.write("basicConstraints=CA:FALSE\n")
    _run("x509", "-req", "-in", "node.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
         "-days", "2", "-extfile", "ext.cnf", "-out", "node.pem", cwd=directory)
    return {"DISTRIB_TLS_CERT": os.path.join(directory, "node.pem"),
            "DISTRIB_TLS_KEY": os.path.join(directory, "node.key"),
            "DISTRIB_TLS_CA": os.path.join(directory, "ca.pem")}
