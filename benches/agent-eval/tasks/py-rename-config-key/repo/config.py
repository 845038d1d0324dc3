import json


def load(path="settings.json"):
    with open(path) as f:
        return json.load(f)


def timeout(settings):
    return settings["timeout"]
