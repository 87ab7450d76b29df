import { PageHeader } from '../ui';

export function ApiKeys() {
  return <PageHeader title="ApiKeys" />;
}
