"""The concurrent-delivery rehearsal (playbook section 9): five injected failures of an
order-payment workflow, each with its local and external evidence (``handoff rehearse``)."""
