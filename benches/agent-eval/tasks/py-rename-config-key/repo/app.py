import config

settings = config.load()
print("timeout", config.timeout(settings))
