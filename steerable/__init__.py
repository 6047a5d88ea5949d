"""steerable: agent conversations that outlive the process running them."""
