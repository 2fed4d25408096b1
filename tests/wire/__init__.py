"""What crosses between the judge and its ranks (pkb_env/wire/): messages, requests, the release page."""
