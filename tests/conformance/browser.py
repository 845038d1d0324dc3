#!/usr/bin/env python3
"""A stand-in for a person's browser (`BROWSER` for kxen-agent in the conformance driver).

`browser.py URL` opens the authorization URL the way a browser does when the user approves at
once: it follows the authorization server's redirects, which end at kxen-agent's loopback
`redirect_uri` with the code. The conformance suite's authorization server approves every
request without asking, so no person is needed; kxen-agent's side of the flow (PKCE, state,
the loopback listener, the code exchange) is the real one.
"""

import sys
import urllib.request

try:
    with urllib.request.urlopen(sys.argv[1], timeout=20) as response:
        response.read()
except Exception as e:  # what a browser would show; kxen-agent times out and says so
    print(f"browser.py: {e}", file=sys.stderr)
    sys.exit(1)
