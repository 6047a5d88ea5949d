"""The LangGraph integration's tests (the checkpointer's are in ``langgraph_saver``)."""
