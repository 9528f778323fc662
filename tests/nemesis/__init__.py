"""The nemesis suite (issue 41): spec-built clients record a history, a nemesis injects faults,
a checker judges the whole history. history.py (the model), checker.py, check_clients.py and
verdict.py (pure), report.py (anomalies with their excerpts), world.py (the serve processes and engines),
clients.py (the recording clients), nemeses.py (the faults), scenario.py (seeded plans and their
execution), cases.py (targeted scenarios); the tests in test_checker.py and test_nemesis.py;
``python -m bench chaos`` (bench/chaos.py) for long runs."""
