//! What defines a copy of a VM's disks, read at one moment — its power state, its disks (keys,
//! files, capacities, change ids), how many disks vSphere counts, its configuration's
//! `changeVersion` — and the power-ons vCenter recorded since a moment: how ferry proves, before
//! the migrated VM is made, that what it copied is the source's final state.

use vim_rs::mo;
use vim_rs::types::enums::EventFilterSpecRecursionOptionEnum;
use vim_rs::types::structs::{EventFilterSpec, EventFilterSpecByEntity, EventFilterSpecByTime};

use super::session::{Session, vm_ref};
use super::{DiskInfo, Error, PowerState, Result, Unread, inventory};

/// A VM's marks, as vCenter answered at [`Marks::at`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Marks {
    /// vCenter's clock just before it was read (`ServiceInstance.CurrentTime`): the power-ons
    /// from then on ([`Session::powered_on_since`]) are the ones these marks do not show.
    pub at: String,
    pub power_state: PowerState,
    /// `config.changeVersion`.
    pub change_version: Option<String>,
    /// Its virtual disks, in device order.
    pub disks: Vec<DiskInfo>,
    /// `summary.config.numVirtualDisks`.
    pub disks_reported: Option<u32>,
    /// What ferry could not read of vSphere's answer.
    pub unread: Vec<Unread>,
}

/// The events of a power-on (`DrsVmPoweredOnEvent` is one, placed by DRS; vCenter filters by
/// type name, not by kind).
const POWER_ON_EVENTS: [&str; 2] = ["VmPoweredOnEvent", "DrsVmPoweredOnEvent"];

impl Session {
    /// vCenter's clock now (`ServiceInstance.CurrentTime`), as it writes times.
    ///
    /// Errors: faults and network errors.
    pub async fn current_time(&self) -> Result<String> {
        let si = mo::ServiceInstance::new(self.parts().2.clone(), "ServiceInstance");
        si.current_time().await.map_err(|e| self.vim(&e))
    }

    /// The VM's marks now: one read of its properties, after one of vCenter's clock.
    ///
    /// Errors: [`Error::NotFound`] for a VM that does not exist; faults and network errors.
    pub async fn marks(&self, moref: &str) -> Result<Marks> {
        let at = self.current_time().await?;
        let Some((p, unread)) = self.vm_props(moref).await? else {
            return Err(Error::NotFound(format!("VM {moref}")));
        };
        let power_state = p
            .power_state
            .as_ref()
            .and_then(inventory::power_state)
            .ok_or_else(|| Error::Protocol(format!("VM {moref} reports no known power state")))?;
        Ok(Marks {
            at,
            power_state,
            change_version: p.change_version,
            disks: inventory::disks(&p.devices.unwrap_or_default()),
            disks_reported: p.num_virtual_disks.and_then(|n| u32::try_from(n).ok()),
            unread,
        })
    }

    /// When the VM was powered on from `since` (vCenter's clock, as [`Marks::at`]) on, by
    /// vCenter's events (`VmPoweredOnEvent`, `DrsVmPoweredOnEvent`): each event's time.
    ///
    /// Errors: faults and network errors (an endpoint without an event manager, an ESXi host
    /// alone, is [`Error::Protocol`]: it cannot tell).
    pub async fn powered_on_since(&self, moref: &str, since: &str) -> Result<Vec<String>> {
        let client = self.parts().2.clone();
        let Some(em) = client.service_content().event_manager.clone() else {
            return Err(Error::Protocol(
                "the endpoint has no event manager: it cannot tell whether the VM was powered on"
                    .into(),
            ));
        };
        let filter = EventFilterSpec {
            entity: Some(EventFilterSpecByEntity {
                entity: vm_ref(moref),
                recursion: EventFilterSpecRecursionOptionEnum::Self_,
            }),
            time: Some(EventFilterSpecByTime {
                begin_time: Some(since.to_owned()),
                end_time: None,
            }),
            user_name: None,
            event_chain_id: None,
            alarm: None,
            scheduled_task: None,
            disable_full_message: Some(true),
            category: None,
            r#type: None,
            tag: None,
            event_type_id: Some(POWER_ON_EVENTS.iter().map(|t| (*t).to_owned()).collect()),
            max_count: None,
            delayed_init: None,
            auditable: None,
            audit_id: None,
        };
        let events = mo::EventManager::new(client, &em.value)
            .query_events(&filter, None)
            .await
            .map_err(|e| self.vim(&e))?;
        Ok(events
            .unwrap_or_default()
            .into_iter()
            .map(|e| e.created_time)
            .collect())
    }
}
