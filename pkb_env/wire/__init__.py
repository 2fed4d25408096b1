"""The wire between the judge and its ranks: framing (channel), what a rank may say (messages), what the
judge asks (requests), and the release page that starts a burst on every rank at once (gate)."""
