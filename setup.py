"""Installable package for the book: metadata comes from settings.ini (shared with nbdev)."""
from configparser import ConfigParser
from pathlib import Path

import setuptools

cfg = ConfigParser(delimiters=["="])
cfg.read(Path(__file__).parent / "settings.ini")
cfg = cfg["DEFAULT"]

requirements = cfg.get("requirements", "").split()
dev_requirements = cfg.get("dev_requirements", "").split()
hf_requirements = cfg.get("hf_requirements", "").split()
real_requirements = cfg.get("real_requirements", "").split()
scripts = [s for s in cfg.get("console_scripts", "").split() if s]

setuptools.setup(
    name=cfg["lib_name"],
    version=cfg["version"],
    description=cfg["description"],
    long_description=(Path(__file__).parent / "README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    author=cfg["author"],
    author_email=cfg["author_email"],
    url=cfg["git_url"],
    license="Apache-2.0",
    keywords=cfg["keywords"].split(),
    python_requires=">=" + cfg["min_python"],
    packages=setuptools.find_packages(include=[cfg["lib_path"], cfg["lib_path"] + ".*"]),
    include_package_data=True,
    package_data={cfg["lib_path"]: ["assets/*", "assets/**/*"]},
    install_requires=requirements,
    extras_require={"dev": dev_requirements, "hf": hf_requirements, "real": real_requirements},
    entry_points={"console_scripts": scripts, "nbdev": [f"{cfg['lib_path']}={cfg['lib_path']}._modidx:d"]},
    zip_safe=False,
)
