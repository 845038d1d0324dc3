sed -i 's/scores\[name.strip()\] = int(score)/scores[name.strip()] = int(score) if score.strip() else 0/' scores.py
