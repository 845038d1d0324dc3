"""Writes build/version.txt from the settings in build.ini."""
import configparser
import os
import sys

KNOWN = {"name", "version"}

config = configparser.ConfigParser()
config.read("build.ini")
section = config["package"]
unknown = set(section) - KNOWN
if unknown:
    sys.exit(f"build.ini: unknown key(s) {sorted(unknown)} in [package]; known: {sorted(KNOWN)}")
os.makedirs("build", exist_ok=True)
with open("build/version.txt", "w") as f:
    f.write(f"{section['name']} {section['version']}\n")
print("wrote build/version.txt")
