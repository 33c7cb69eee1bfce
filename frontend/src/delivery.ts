// Whether Warden's e-mail and chat reach anyone (admins only): the banner reads it, the Settings
// page refreshes it after a save.
import { reactive } from 'vue'
import { api, unwrap } from './api/client'

export const delivery = reactive({ known: false, reachesNobody: false })

export async function refreshDelivery(): Promise<void> {
  try {
    const settings = await unwrap(api.GET('/api/v1/settings/delivery'))
    delivery.reachesNobody = settings.reaches_nobody
    delivery.known = true
  } catch {
    delivery.known = false // the banner says nothing it cannot tell
  }
}
