import { PageHeader } from '../ui';

export function Billing() {
  return <PageHeader title="Billing" />;
}
