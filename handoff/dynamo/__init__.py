"""The AWS twin: the emit contract and the tracker's reads on the original single-table
DynamoDB design (``store.py``), with the places where DynamoDB forces another mechanism
written down next to the code that copes with them."""
