"""The ``flowcore`` command: everything that reads files, talks to terminals or
databases lives here, outside the pure core."""
