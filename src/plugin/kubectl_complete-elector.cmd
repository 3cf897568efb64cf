@rem Completion of `kubectl elector` through kubectl (1.26 and later) on Windows: kubectl runs
@rem this file, found on the PATH, with the words typed after `kubectl elector`.
@kubectl-elector __complete %*
