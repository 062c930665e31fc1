"""The ``graphormer-urpe`` command: one module per subcommand."""
