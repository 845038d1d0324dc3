def parse_scores(text):
    """Maps each name to its score from lines "name,score"; blank lines are skipped."""
    scores = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        name, score = line.split(",")
        scores[name.strip()] = int(score)
    return scores
