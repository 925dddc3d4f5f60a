-- Argo CD health check for agents.agentrun.dev/AgentRunTemplate,
-- agents.agentrun.dev/AgentSchedule and agents.agentrun.dev/MCPServer.
--
-- Install it in argocd-cm under the keys
--   resource.customizations.health.agents.agentrun.dev_AgentRunTemplate
--   resource.customizations.health.agents.agentrun.dev_AgentSchedule
--   resource.customizations.health.agents.agentrun.dev_MCPServer
-- (see docs/gitops.md). The three kinds report a Ready condition: True is
-- Healthy (for a schedule with reason Suspended, Suspended), False is
-- Degraded (a template with a placeholder it does not declare, a schedule
-- that cannot be read or cannot create its runs, an MCP server whose tools
-- could not be listed), and no condition yet, or one older than the
-- object's generation, is Progressing.
local hs = { status = "Progressing", message = "waiting for the AgentRun operator" }
local st = obj.status
if st == nil then
  return hs
end

local gen = obj.metadata and obj.metadata.generation
if gen ~= nil and st.observedGeneration ~= nil and st.observedGeneration ~= gen then
  hs.message = "the operator has not yet observed generation " .. tostring(gen)
  return hs
end

local ready = nil
if st.conditions ~= nil then
  for _, c in ipairs(st.conditions) do
    if c.type == "Ready" then
      ready = c
    end
  end
end
if ready == nil then
  return hs
end
hs.message = ready.message or ""
if ready.status == "True" then
  if ready.reason == "Suspended" then
    hs.status = "Suspended"
  else
    hs.status = "Healthy"
  end
elseif ready.status == "False" then
  hs.status = "Degraded"
end
return hs
