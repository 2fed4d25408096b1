"""The suite's tasks (tasks/): goldens, references judged at about 1x, wrong candidates judged wrong, edge
cases, the truth, the vocab filters, the catalogue."""
