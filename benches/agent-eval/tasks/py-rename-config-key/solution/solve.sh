sed -i 's/"timeout"/"timeout_seconds"/' settings.json config.py
