-- Argo CD health check for agents.agentrun.dev/AgentRun.
--
-- Install it in argocd-cm under the key
--   resource.customizations.health.agents.agentrun.dev_AgentRun
-- (see docs/gitops.md). Argo CD passes the object as `obj` and reads the
-- table returned. It reads the run's kstatus conditions: Ready (a run that
-- completed) is Healthy, Stalled (any other outcome, or a run refused to
-- start) is Degraded, a run waiting for a person to answer a call
-- (AwaitingApproval) is Suspended, and anything else (not yet seen by the
-- operator, pending, running) is Progressing.
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

local cond = {}
if st.conditions ~= nil then
  for _, c in ipairs(st.conditions) do
    cond[c.type] = c
  end
end
local function is_true(t)
  return cond[t] ~= nil and cond[t].status == "True"
end
local function describe(prefix, text)
  if text ~= nil and text ~= "" then
    return prefix .. ": " .. text
  end
  return prefix
end

local function health(status, message)
  hs.status = status
  hs.message = message
  return hs
end

if is_true("Ready") then
  return health("Healthy", describe("Completed", st.reason))
end
if is_true("Stalled") then
  -- An outcome other than Completed, or a run the operator refuses to
  -- start (a GitOps re-run, see docs/gitops.md).
  return health("Degraded", describe(st.outcome or cond["Stalled"].reason, st.reason or cond["Stalled"].message))
end
if is_true("AwaitingApproval") then
  return health("Suspended", describe("AwaitingApproval", st.reason))
end
return health("Progressing", describe(st.phase or "Pending", cond["Succeeded"] and cond["Succeeded"].message))
