-- Argo CD health for sandbox.coreweave.com/ManagedRunner (the ManagedRunner operator).
-- Status fields and conditions are described in the operator's docs/gitops.md.
-- Uses only base and table functions, so it runs from argocd-cm without useOpenLibs.
--
--   Healthy      Ready=True for the current generation
--   Suspended    spec.paused (Synced=False, reason Paused)
--   Degraded     a problem only a person can fix: Stalled=True (a spec change is needed), install
--                failed, runner disconnected, credentials refused or missing, deletion stalled
--   Progressing  everything else: the operator has not reported this generation yet, or creation,
--                install, rollout, update or deletion (within its deadline) is in flight

local NEEDS_SPEC_CHANGE = {
  RunnerIdTaken = true, ClusterTaken = true, DuplicateRunnerId = true, AdoptionMismatch = true,
  InvalidSpec = true, ImmutableFieldChanged = true, IncompatibleServer = true,
}

-- Synced=False reasons a person must fix (the operator keeps retrying, slowly).
local NEEDS_A_PERSON = {
  CredentialsMissing = true, CredentialsSecretNotFound = true, CredentialsKeyMissing = true,
  CredentialsRejected = true, PermissionDenied = true, SecretNotFound = true, SecretKeyMissing = true,
  SecretAccessDenied = true,
}

local function result(status, message)
  return { status = status, message = message }
end

local function condition(status, kind)
  if type(status.conditions) ~= "table" then
    return nil
  end
  for _, c in ipairs(status.conditions) do
    if c.type == kind then
      return c
    end
  end
  return nil
end

local function said(c)
  if c == nil then
    return "no details"
  end
  if c.message == nil or c.message == "" then
    return tostring(c.reason)
  end
  return tostring(c.reason) .. ": " .. tostring(c.message)
end

local function install_failure(runner, status, ready)
  local err = status.installError
  if type(err) ~= "table" then
    return "Install of runner " .. runner .. " failed: " .. said(ready)
  end
  local parts = { "Install of runner " .. runner .. " failed" }
  if err.reason ~= nil then
    parts[1] = parts[1] .. " (" .. tostring(err.reason) .. ")"
  end
  if err.message ~= nil then
    parts[1] = parts[1] .. ": " .. tostring(err.message)
  end
  if err.diagnosticDetail ~= nil then
    table.insert(parts, tostring(err.diagnosticDetail))
  end
  if type(err.remediationHints) == "table" and #err.remediationHints > 0 then
    table.insert(parts, "hints: " .. table.concat(err.remediationHints, "; "))
  end
  return table.concat(parts, ". ") .. ". The operator keeps watching; fix the cause on the cluster"
end

local function deleting(runner, spec, status, ready, synced)
  local deletion = status.deletion
  if type(deletion) == "table" and deletion.stalled == true then
    local stalled = condition(status, "Stalled")
    if stalled ~= nil and stalled.reason == "DeletionStalled" and stalled.message ~= nil then
      return result("Degraded", "Deletion stalled: " .. stalled.message)
    end
    return result("Degraded", "Deletion of runner " .. runner .. " passed its deadline "
      .. tostring(deletion.deadlineTime) .. "; the operator keeps retrying. Check the runner in the "
      .. "CoreWeave console, or set spec.deletionPolicy: Orphan to leave it behind")
  end
  if synced ~= nil and synced.status == "False" and synced.reason ~= "Paused" then
    if NEEDS_A_PERSON[synced.reason] or NEEDS_SPEC_CHANGE[synced.reason] then
      return result("Degraded", "Deletion blocked: " .. said(synced))
    end
    return result("Progressing", "Deleting runner " .. runner .. ", retrying after " .. said(synced))
  end
  if type(deletion) ~= "table" then
    if spec.deletionPolicy == "Orphan" then
      return result("Progressing", "Releasing runner " .. runner .. " (deletionPolicy: Orphan)")
    end
    return result("Progressing", "Deletion requested; waiting for the operator to start it")
  end
  local doing = "waiting for CoreWeave"
  if ready ~= nil and ready.status == "False" and ready.message ~= nil and ready.message ~= "" then
    doing = tostring(ready.message)
  end
  return result("Progressing", "Deleting runner " .. runner .. ": " .. doing .. ". The finalizer stays until "
    .. "CoreWeave confirms it is gone; reported as stalled after " .. tostring(deletion.deadlineTime))
end

local function health(o)
  local meta = o.metadata or {}
  local spec = o.spec or {}
  local status = o.status or {}
  local runner = tostring(spec.runnerId or meta.name)
  local generation = meta.generation or 0
  local ready = condition(status, "Ready")
  local synced = condition(status, "Synced")

  if meta.deletionTimestamp ~= nil then
    return deleting(runner, spec, status, ready, synced)
  end
  if synced == nil then
    return result("Progressing", "Waiting for the ManagedRunner operator to report status "
      .. "(is it running and watching namespace " .. tostring(meta.namespace) .. "?)")
  end
  if synced.observedGeneration ~= generation then
    return result("Progressing", "Waiting for the operator to process generation " .. tostring(generation)
      .. " (status is for generation " .. tostring(synced.observedGeneration) .. ")")
  end

  local stalled = condition(status, "Stalled")
  if stalled ~= nil and stalled.status == "True" and stalled.reason ~= "DeletionStalled" then
    return result("Degraded", "Needs a spec change: " .. said(stalled))
  end
  if synced.status == "False" and NEEDS_SPEC_CHANGE[synced.reason] then
    return result("Degraded", "Needs a spec change: " .. said(synced))
  end
  if synced.status == "False" and synced.reason == "Paused" then
    local state = "phase " .. tostring(status.phase)
    if ready ~= nil and ready.status == "True" then
      state = "Ready"
    end
    return result("Suspended", "Paused: spec.paused is true, so no changes are sent to CoreWeave (runner "
      .. runner .. " is " .. state .. "); set spec.paused: false to resume")
  end
  if synced.status == "False" and NEEDS_A_PERSON[synced.reason] then
    return result("Degraded", said(synced))
  end

  local current = ready ~= nil and ready.observedGeneration == generation
    and status.observedGeneration == generation
  if current and ready.status == "True" then
    if synced.status == "False" then
      return result("Healthy", tostring(ready.message) .. "; the latest check failed and is retried ("
        .. said(synced) .. ")")
    end
    return result("Healthy", tostring(ready.message))
  end
  if ready ~= nil and ready.status == "False" and ready.reason == "InstallFailed" then
    return result("Degraded", install_failure(runner, status, ready))
  end
  if ready ~= nil and ready.status == "False" and ready.reason == "Disconnected" then
    return result("Degraded", "Runner " .. runner .. " is installed but not connected to CoreWeave ("
      .. tostring(ready.message) .. "); check the runner pods on cluster "
      .. tostring(status.clusterName or spec.clusterId))
  end
  if synced.status == "False" then
    return result("Progressing", "Retrying after " .. said(synced))
  end
  if ready == nil then
    return result("Progressing", "Waiting for runner " .. runner .. " to become ready")
  end
  return result("Progressing", "Runner " .. runner .. " is not ready yet: " .. said(ready))
end

return health(obj)
