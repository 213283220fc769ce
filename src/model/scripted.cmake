# The scripted test model (RapidScriptedForCausalLM, src/model/scripted.c): drives the server's
# tool-calling tests through the real engine; not a real architecture.
list(APPEND RP_SOURCES src/model/scripted.c)
