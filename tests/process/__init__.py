"""The installed `kvtop` command and other child processes, and real loopback sockets."""
