-- GET of one fixed path (SCALE_PATH), e.g. a silo listing page deep in the list.
wrk.method = "GET"
wrk.path = os.getenv("SCALE_PATH")
