"""What the agent host and the workflow executor share as workers of the mesh.

- :mod:`~a2amesh.worker.decode`: the one decode path of every received message (limits, precise errors);
- :mod:`~a2amesh.worker.intake`: work messages decoded, handed over and settled (ack / nak / term);
- :mod:`~a2amesh.worker.control`: the control plane (GetTask, CancelTask, SubscribeToTask, ListTasks);
- :mod:`~a2amesh.worker.endpoint`: one served name's card, control subject and pull consumer, and leaving them;
- :mod:`~a2amesh.worker.replies`: the reply sender (subjects, headers, durable publishing, errors).

Layering: protocol / bus / store → workflow → worker → executor / agent → cli.
"""
