//! Recording a new machine in the management etcd: the next serial of its control
//! plane and, for a local machine, its address (`choose_address`), in one transaction.

use super::*;

impl EtcdStore {
    /// `StateStore::allocate_machine_at`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn allocate_at(
        &mut self,
        cp: &str,
        bootstrap: bool,
        version: Version,
        certificates_not_after_unix_s: Option<i64>,
        remediation: Option<Remediation>,
        at: Option<&Placed>,
        is_free: &dyn Fn(Ipv4Addr) -> bool,
    ) -> Result<Machine> {
        let subnet = self.subnet()?;
        let cp_key = self.key(&format!("cp/{cp}"));
        let addr_key = self.key("next-address");
        for attempt in 0..WRITE_ATTEMPTS {
            backoff(attempt);
            let Some((mut rec, cp_rev)) = self.cp_record(cp)? else {
                return Err(StoreError::NotFound(cp.to_string()));
            };
            let (mut next_addr, addr_cmp) = self.next_address(&addr_key)?;
            // A fresh address was never used by another control plane; one of this
            // control plane's own only once no machine holds it (see the embedded
            // store). A machine recorded meanwhile changes the record compared below.
            let held = self.machines(cp)?;
            let address = choose_address(
                &mut rec.control_plane,
                &held,
                subnet,
                &mut next_addr,
                at,
                is_free,
            )?;
            let machine = new_machine(
                cp,
                rec.next_serial,
                address,
                at,
                version,
                bootstrap,
                certificates_not_after_unix_s,
                remediation.clone(),
                // The CA files of a rotation's phase, from the record the allocation
                // compares: a machine recorded now starts with them.
                rec.control_plane.ca_step_now(),
            )?;
            rec.next_serial += 1;
            let m_key = self.key(&format!("machine/{cp}/{}", machine.name));
            let compares = vec![
                Compare::mod_revision(cp_key.clone(), CompareOp::Equal, cp_rev),
                addr_cmp,
                absent(&m_key),
            ];
            let value = to_json(&machine);
            let landed = Landed::Value {
                key: m_key.clone(),
                value: value.clone().into_bytes(),
            };
            let ops = vec![
                TxnOp::put(m_key, value, None),
                TxnOp::put(cp_key.clone(), to_json(&rec), None),
                TxnOp::put(addr_key.clone(), next_addr.to_string(), None),
            ];
            if let Committed::Yes(_) =
                self.commit("allocate a machine", compares, ops, Some(landed))?
            {
                return Ok(machine);
            }
        }
        Err(self.conflict(format!("machine allocation of {cp:?}")))
    }

    /// The next fresh address's number (0 at first), and the comparison that holds
    /// while no other allocation took it.
    fn next_address(&self, addr_key: &str) -> Result<(u64, Compare)> {
        let Some(kv) = self.get(addr_key, "read the next address")? else {
            return Ok((0, absent(addr_key)));
        };
        let n: u64 = std::str::from_utf8(&kv.value)
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| self.corrupt("next-address is not a number"))?;
        let unchanged =
            Compare::mod_revision(addr_key.to_string(), CompareOp::Equal, kv.mod_revision);
        Ok((n, unchanged))
    }
}
