-- The floor: the cheapest request the service answers (no store access).
wrk.method = "GET"
wrk.path = "/healthz"
