"""Text handling shared by the engine, its servers and the agent (pure Python, no torch): segment.py cuts text
into sentences and speakable segments."""
