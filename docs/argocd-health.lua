-- Argo CD health of a LeaderElection (elector.dev). Paste it into the argocd-cm ConfigMap
-- under `resource.customizations.health.elector.dev_LeaderElection` (docs/operations.md,
-- "GitOps health"). It reads what the operator writes: observedGeneration, the phase and
-- the Ready and Stalled conditions.
local function health(status, message)
  return { status = status, message = message }
end
local waiting = "waiting for the operator to act on the election"
local status = obj.status
if status == nil or status.conditions == nil then
  return health("Progressing", waiting)
end
local generation = obj.metadata and obj.metadata.generation
if generation ~= nil and status.observedGeneration ~= generation then
  return health("Progressing", "the operator has not acted on the latest spec yet")
end
local found = {}
for _, condition in ipairs(status.conditions) do
  found[condition.type] = condition
end
local ready, stalled = found["Ready"], found["Stalled"]
if stalled ~= nil and stalled.status == "True" then
  return health("Degraded", stalled.message)
end
if status.phase == "Paused" then
  return health("Suspended", "paused (spec.paused): nothing moves until it is resumed")
end
if ready ~= nil and ready.status == "True" then
  return health("Healthy", ready.message)
end
return health("Progressing", ready and ready.message or waiting)
