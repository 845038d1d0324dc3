sed -i 's/^verison/version/' build.ini
python3 build.py
