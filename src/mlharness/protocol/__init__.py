"""What a SUT node (``serve/``) and its client (the ``remote`` backend) share: the wire format
of requests and answers, and the node's token."""
